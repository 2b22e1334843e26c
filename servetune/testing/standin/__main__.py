"""`python -m servetune.testing.standin <sglang flags>`: run the stand-in server (see the package docstring)."""

from servetune.testing.standin._server import main

if __name__ == "__main__":
    main()
