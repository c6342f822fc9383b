"""Serve moto one request at a time (test tooling for `make test-stores`).

moto's own `moto_server` is threaded, and its in-memory DynamoDB backend is
not thread-safe: concurrent transactions fail with "dictionary changed size
during iteration" (HTTP 500). DynamoDB serialises conflicting writes; this
launcher gives moto the same footing by handling one request at a time.
Usage: moto-serial.py PORT
"""
import sys

from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app

if __name__ == "__main__":
    port = int(sys.argv[1])
    app = DomainDispatcherApplication(create_backend_app)
    run_simple("127.0.0.1", port, app, threaded=False, request_handler=MotoRequestHandler)
