# Builds the Fusebox manager as a static binary on a distroless, non-root base.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
WORKDIR /workspace
# The operator is built in the workspace of go.work, which names every module: their
# go.mod files come first so that the download layer is cached.
COPY go.work go.work.sum go.mod go.sum ./
COPY bench/go.mod bench/go.sum bench/
COPY pkg/breaker/go.mod pkg/breaker/
COPY pkg/breaker/kube/go.mod pkg/breaker/kube/go.sum pkg/breaker/kube/
COPY pkg/breaker/otelbreaker/go.mod pkg/breaker/otelbreaker/go.sum pkg/breaker/otelbreaker/
COPY pkg/breaker/redisstore/go.mod pkg/breaker/redisstore/go.sum pkg/breaker/redisstore/
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
COPY pkg/ pkg/
# The same flags as `make image` (hack/image), which builds this image without
# a container engine, reproducibly; see docs/image.md.
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -buildvcs=false -ldflags="-s -w -buildid=" -o manager ./cmd/manager

FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.source="https://github.com/fusebox-dev/fusebox" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
WORKDIR /
COPY --from=builder /workspace/manager .
USER 65532:65532
ENTRYPOINT ["/manager"]
