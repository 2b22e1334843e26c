"""How fast the builtin client makes unique benchmark images, against the naive way.

    python benchmarks/image_generation.py [--count 200] [--json]

`naive (SGLang's way)` is what SGLang's client does per image before sending anything:
a full-resolution float noise array, cast to bytes, encoded as JPEG quality 85 (its model
processor pass, which SGLang also runs per image to count tokens, is not included).
`servetune (spliced)` assembles each image from pre-encoded restart-marker rows
(servetune/bench/images.py); its one-off set-up per run is shown apart.
Figures are images per second on one core, base64 included for both.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import platform
import time


def naive_sglang(width: int, height: int, rng) -> bytes:
    from PIL import Image

    array = (rng.random((height, width, 3)) * 255).astype("uint8")
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="JPEG", quality=85)
    return base64.b64encode(buffer.getvalue())


def measure(make, count: int) -> float:
    started = time.perf_counter()
    for index in range(count):
        make(index)
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="images per measurement (default 200)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()

    import numpy as np

    from servetune.bench.images import ImageFactory

    rng = np.random.default_rng(0)
    rows = []
    for label, (width, height) in (("720p", (1280, 720)), ("1080p", (1920, 1080))):
        started = time.perf_counter()
        factory = ImageFactory(width, height)
        setup_s = time.perf_counter() - started
        spliced = measure(factory.base64, args.count)
        naive = measure(
            lambda _, width=width, height=height: naive_sglang(width, height, rng), max(args.count // 5, 10)
        )
        rows.append(
            {
                "resolution": label,
                "servetune_images_per_s": round(spliced),
                "naive_images_per_s": round(naive, 1),
                "speedup": round(spliced / naive, 1),
                "servetune_setup_s": round(setup_s, 3),
                "jpeg_bytes": len(factory.image(0)),
            }
        )
    if args.json:
        print(
            json.dumps({"python": platform.python_version(), "machine": platform.machine(), "results": rows}, indent=2)
        )
        return
    print(
        f"{'resolution':<11} {'servetune img/s':>16} {'naive img/s':>12} "
        f"{'speedup':>8} {'set-up s':>9} {'JPEG bytes':>11}"
    )
    for row in rows:
        print(
            f"{row['resolution']:<11} {row['servetune_images_per_s']:>16} {row['naive_images_per_s']:>12} "
            f"{row['speedup']:>7}x {row['servetune_setup_s']:>9} {row['jpeg_bytes']:>11}"
        )


if __name__ == "__main__":
    main()
