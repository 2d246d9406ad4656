"""The operator console at /console: pages served by the gateway itself, from the state it already keeps."""
