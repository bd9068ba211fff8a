# One image per service: docker build --target gateway -t loom/gateway .
FROM golang:1.26 AS build
WORKDIR /src
COPY . .
RUN for s in gateway provisioner scheduler health registry training bridge agent; do \
      CGO_ENABLED=0 go build -o /out/$s ./services/$s/cmd/$s || exit 1; done && \
    CGO_ENABLED=0 go build -o /out/loom ./cmd/loom

FROM gcr.io/distroless/static-debian12 AS base
COPY --from=build /out/loom /usr/local/bin/loom

FROM base AS gateway
COPY --from=build /out/gateway /usr/local/bin/
ENTRYPOINT ["gateway"]
FROM base AS provisioner
COPY --from=build /out/provisioner /out/agent /usr/local/bin/
ENTRYPOINT ["provisioner"]
FROM base AS scheduler
COPY --from=build /out/scheduler /usr/local/bin/
ENTRYPOINT ["scheduler"]
FROM base AS health
COPY --from=build /out/health /usr/local/bin/
ENTRYPOINT ["health"]
FROM base AS registry
COPY --from=build /out/registry /usr/local/bin/
ENTRYPOINT ["registry"]
FROM base AS training
COPY --from=build /out/training /usr/local/bin/
ENTRYPOINT ["training"]
FROM base AS bridge
COPY --from=build /out/bridge /usr/local/bin/
ENTRYPOINT ["bridge"]
FROM debian:12-slim AS agent
COPY --from=build /out/agent /out/loom /usr/local/bin/
ENTRYPOINT ["agent"]
