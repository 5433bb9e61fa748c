# Redis for the replicated alias store (docker-compose.replicas.yml): one
# image for the primary, its replica and the Sentinels (`redis-server
# --sentinel`), Debian's redis-server package on DEBIAN_IMAGE, so it builds
# wherever docker-compose.yml builds (Debian's mirror, no registry needed
# with tests/compose/images.sh's base). Runs as Debian's `redis` user.
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o redis -g redis -m 0750 /data
WORKDIR /data
USER redis
EXPOSE 6379 26379
HEALTHCHECK --interval=2s --timeout=2s --retries=30 \
  CMD ["sh", "-c", "redis-cli -p ${REDIS_PORT:-6379} ping | grep -q PONG"]
CMD ["redis-server", "--protected-mode", "no"]
