"""An OTLP/HTTP trace sink for bench/traces/run.sh: reads every POST body and answers 200 with an
empty ExportTraceServiceResponse, counting exports and bytes; POST /mark/NAME closes the count of
the run NAME (what arrived since the last mark) and writes all counts to the JSON file."""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, path = int(sys.argv[1]), sys.argv[2]
counts, current = {}, {"exports": 0, "bytes": 0}


class Sink(BaseHTTPRequestHandler):
    def do_POST(self):
        global current
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path.startswith("/mark/"):
            counts[self.path[len("/mark/"):]] = current
            current = {"exports": 0, "bytes": 0}
            with open(path, "w") as f:
                json.dump(counts, f)
        elif body:
            current["exports"] += 1
            current["bytes"] += len(body)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()
