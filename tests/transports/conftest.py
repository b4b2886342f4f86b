from live_server import serve  # noqa: F401  (the fixture)
