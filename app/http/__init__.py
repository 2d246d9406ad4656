"""The HTTP front: the server, the fast path, intake, the admin routes and SSE framing."""
