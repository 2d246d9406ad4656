# Slim, non-root image of the gateway. Mount the config at /etc/slipstream/gateway.yaml.
#   docker build -t slipstream .
#   docker run -p 8080:8080 -v $PWD/config/gateway.yaml:/etc/slipstream/gateway.yaml:ro slipstream
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /install /usr/local
RUN useradd --system --uid 10001 --no-create-home slipstream \
    && mkdir -p /etc/slipstream \
    && chown slipstream /etc/slipstream
COPY config/demo.yaml /etc/slipstream/gateway.yaml
USER 10001
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=2s --start-period=5s --retries=3 \
    CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2); sys.exit(0)" || exit 1
ENTRYPOINT ["slipstream", "serve", "--config", "/etc/slipstream/gateway.yaml", "--host", "0.0.0.0"]
