"""`python -m servetune.standin <sglang flags>`: run the stand-in server (see the package docstring)."""

from servetune.standin._server import main

if __name__ == "__main__":
    main()
