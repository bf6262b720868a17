# The Cairn recall service. Build from the repository root:
#   docker build -f docker/recall.Dockerfile -t cairn-recall .
# Stage 1 installs Cairn into a virtualenv; stage 2 copies only that virtualenv onto a slim
# base, so no compiler, pip cache or source tree reaches the image.
FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY clients/python ./clients/python
COPY cairn_server ./cairn_server
COPY state_service ./state_service
COPY recall_service ./recall_service
RUN python -m venv /opt/cairn \
    && /opt/cairn/bin/pip install --no-cache-dir --upgrade pip==25.3 \
    && /opt/cairn/bin/pip install --no-cache-dir .

FROM python:3.11.11-slim-bookworm
RUN groupadd --system --gid 10001 cairn \
    && useradd --system --uid 10001 --gid cairn --home-dir /data --no-create-home cairn \
    && mkdir /data \
    && chown cairn:cairn /data
COPY --from=build /opt/cairn /opt/cairn
ENV PATH=/opt/cairn/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    CAIRN_DATA_DIR=/data \
    CAIRN_HOST=0.0.0.0 \
    CAIRN_METRICS_HOST=0.0.0.0
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 50052 9052
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-m", "cairn_server.healthcheck", "--port", "50052"]
ENTRYPOINT ["cairn", "recall", "serve"]
