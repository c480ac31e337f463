# Builds the Fusebox manager as a static binary on a distroless, non-root base.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
WORKDIR /workspace
# The operator is built in the workspace of go.work, which names every module.
COPY go.work go.work.sum go.mod go.sum ./
COPY bench/go.mod bench/go.sum bench/
COPY pkg/breaker/go.mod pkg/breaker/
COPY pkg/breaker/kube/go.mod pkg/breaker/kube/go.sum pkg/breaker/kube/
COPY pkg/breaker/otelbreaker/go.mod pkg/breaker/otelbreaker/go.sum pkg/breaker/otelbreaker/
COPY pkg/breaker/redisstore/go.mod pkg/breaker/redisstore/go.sum pkg/breaker/redisstore/
# hack/tools pins the Kubernetes binaries hack/ builds; go.work names it so that they share
# the operator's versions (docs/development.md, "The workspace"). Only what the manager
# needs is downloaded.
COPY hack/tools/go.mod hack/tools/go.sum hack/tools/
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
COPY pkg/ pkg/
RUN go list -deps ./cmd/manager >/dev/null
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
