"""Unique benchmark images, made fast enough never to slow the traffic they feed.

SGLang's client draws a full-resolution noise array, JPEG-encodes it and runs the model's
processor on every image; on the H200 that took ~80 s for ~20 s of traffic. Here a JPEG
is assembled from pre-encoded pieces instead of being encoded per image:

1. Once per factory, a tall noise image (256 MCU rows of the target width) is encoded with
   a restart marker after every MCU row. Restart markers reset the entropy decoder, so the
   bytes of each MCU row are a self-contained segment that decodes the same at any row.
2. Each image is the target-size JPEG header followed by one segment per MCU row, chosen
   from the 256, with restart markers renumbered: a byte join, no encoding.
3. The choice of segments makes every image distinct in its decoded pixels (what servers
   hash for their media caches): the first three rows spell the image's index in base 256
   (unique within a run, up to 16.7 M images), the remaining rows come from SHAKE-128 of a
   per-run random nonce and the index (unique across runs with overwhelming probability:
   a 720p image has 42 such rows, 336 bits).

The result is noise content like SGLang's (`--image-content random`, quality 85), so the
server's decode and preprocessing work per image is the same. PNG (or a Pillow without
restart-marker support) falls back to encoding a noise image whose first rows carry the
same unique pattern.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re

_SEGMENT_ROWS = 256
_INDEX_ROWS = 3
_RST = [bytes([0xFF, 0xD0 + k]) for k in range(8)]
_RST_SPLIT = re.compile(rb"\xff[\xd0-\xd7]")


def _noise(width: int, height: int):
    from PIL import Image

    return Image.frombytes("RGB", (width, height), os.urandom(width * height * 3))


def _split_jpeg(data: bytes) -> tuple[bytes, bytes, list[bytes]]:
    """(header up to the end of SOS, the tables part of the header, entropy segments)."""
    pos, tables = 2, []
    while True:
        if data[pos] != 0xFF:
            raise ValueError("not a baseline JPEG")
        marker = data[pos + 1]
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if marker in (0xDB, 0xC4):
            tables.append(data[pos : pos + 2 + length])
        pos += 2 + length
        if marker == 0xDA:
            break
    end = data.rindex(b"\xff\xd9")
    return data[:pos], b"".join(tables), _RST_SPLIT.split(data[pos:end])


class ImageFactory:
    """Makes distinct images of one size and format, each a function of (nonce, index).

    Args:
        width, height: pixels.
        fmt: `jpeg` or `png`.
        nonce: bytes mixed into every image; random by default, so that two runs never
            send the same image. Pass a fixed nonce for a reproducible pool.
        quality: JPEG quality (SGLang's client uses 85).
    """

    def __init__(
        self, width: int, height: int, fmt: str = "jpeg", *, nonce: bytes | None = None, quality: int = 85
    ) -> None:
        self.width, self.height, self.format, self.quality = width, height, fmt, quality
        self.nonce = os.urandom(16) if nonce is None else nonce
        self.mime = f"image/{fmt}"
        self.spliced = False
        if fmt == "jpeg":
            try:
                self._prepare_splice()
                self.spliced = True
            except (TypeError, ValueError):
                pass
        if not self.spliced:
            self._base = _noise(width, height)

    def _encode(self, image, **options) -> bytes:
        buffer = io.BytesIO()
        if self.format == "jpeg":
            image.save(buffer, format="JPEG", quality=self.quality, **options)
        else:
            image.save(buffer, format="PNG", compress_level=0)
        return buffer.getvalue()

    def _prepare_splice(self) -> None:
        target = self._encode(
            _noise(self.width, min(self.height, 16)).resize((self.width, self.height)), restart_marker_rows=1
        )
        header, tables, rows = _split_jpeg(target)
        tall = self._encode(_noise(self.width, 16 * _SEGMENT_ROWS), restart_marker_rows=1)
        _, tall_tables, segments = _split_jpeg(tall)
        if tables != tall_tables or len(segments) != _SEGMENT_ROWS or len(rows) < _INDEX_ROWS + 1:
            raise ValueError("JPEG pieces do not line up")
        self._header, self._segments, self._rows = header, segments, len(rows)

    def _choices(self, index: int, count: int) -> bytes:
        digits = (
            index.to_bytes(_INDEX_ROWS, "big")
            if index < 256**_INDEX_ROWS
            else hashlib.sha256(b"%d" % index).digest()[:_INDEX_ROWS]
        )
        stream = hashlib.shake_128(self.nonce + index.to_bytes(8, "big")).digest(max(count - _INDEX_ROWS, 0))
        return (digits + stream)[:count]

    def image(self, index: int) -> bytes:
        """The encoded bytes of image `index` (distinct for distinct indices and nonces)."""
        if self.spliced:
            parts = [self._header]
            segments = self._segments
            last = self._rows - 1
            for row, choice in enumerate(self._choices(index, self._rows)):
                parts.append(segments[choice])
                if row < last:
                    parts.append(_RST[row & 7])
            parts.append(b"\xff\xd9")
            return b"".join(parts)
        from PIL import Image

        image = self._base.copy()
        pattern = self._choices(index, 64)
        row = b"".join(bytes((value, value ^ 0x55, value ^ 0xAA)) * 16 for value in pattern)
        row = (row * (self.width // len(row) // 3 + 1) * 3)[: self.width * 3]
        rows = min(16, self.height)
        image.paste(Image.frombytes("RGB", (self.width, rows), row * rows), (0, 0))
        return self._encode(image)

    def base64(self, index: int) -> bytes:
        """Image `index`, base64-encoded (ASCII bytes)."""
        return base64.b64encode(self.image(index))

    def data_url(self, index: int) -> str:
        """Image `index` as a `data:` URL, as OpenAI-style chat requests carry it."""
        return f"data:{self.mime};base64," + self.base64(index).decode("ascii")


def naive_image(width: int, height: int, fmt: str = "jpeg") -> bytes:
    """An image made the way SGLang's client makes one (full noise array, then encode): the baseline."""
    buffer = io.BytesIO()
    options = {"quality": 85} if fmt == "jpeg" else {}
    _noise(width, height).save(buffer, format=fmt.upper(), **options)
    return buffer.getvalue()
