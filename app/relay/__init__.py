"""The relay: an upstream answer or stream, carried to the client."""
