# The OpenTelemetry collector (contrib) for docker compose, with a health check. The upstream image is FROM scratch:
# no shell and no HTTP client, so compose cannot ask its health_check extension (13133) anything. This copies the
# statically linked collector onto busybox, whose wget the compose healthcheck uses. Same binary, same config.
ARG OTELCOL_VERSION=0.147.0
FROM otel/opentelemetry-collector-contrib:${OTELCOL_VERSION} AS upstream

FROM busybox:1.37-musl
COPY --from=upstream /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=upstream /otelcol-contrib /otelcol-contrib
# Where the file exporter writes the logs (a named volume takes this directory's owner when first mounted).
RUN mkdir -p /var/lib/otelcol/logs && chown 10001:10001 /var/lib/otelcol/logs
USER 10001:10001
EXPOSE 4317 4318 13133
ENTRYPOINT ["/otelcol-contrib"]
CMD ["--config=/etc/otelcol-contrib/config.yaml"]
