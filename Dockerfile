# The leasehold binary in a small image: `docker build -t leasehold .`, then
# `docker run leasehold serve …` / `migrate …` / `run …` (see README.md).
# docker-compose.yml builds it for the fleet it runs.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a change to the code does not download them again.
COPY go.mod go.sum ./
# The product's module alone: the workspace's test modules (go.work) are not needed here.
ENV GOWORK=off
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The version `leasehold version` and the sidecar's status report, stamped as `make build`
# stamps it: `docker build --build-arg VERSION=$(scripts/version.sh) --build-arg COMMIT=$(scripts/version.sh --commit) .`
# (make image does). .git stays out of the build context, so without them the binary says devel.
ARG VERSION=
ARG COMMIT=
# Pure Go (the SQLite driver needs no cgo), so the binary runs on any base image.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath \
      -ldflags="-s -w -X github.com/leasehold/leasehold/internal/version.version=${VERSION} -X github.com/leasehold/leasehold/internal/version.commit=${COMMIT}" \
      -o /out/leasehold ./cmd/leasehold

# Alpine rather than distroless because the compose healthcheck needs an HTTP client
# (busybox wget) inside the container.
FROM alpine:3.22
RUN addgroup -S -g 10001 leasehold \
 && adduser -S -D -H -u 10001 -G leasehold -s /sbin/nologin leasehold \
 && mkdir -p /var/lib/leasehold \
 && chown leasehold:leasehold /var/lib/leasehold
COPY --from=build /out/leasehold /usr/local/bin/leasehold
# The default store, sqlite:./leasehold.db, lands here: mount a volume on it to keep it.
WORKDIR /var/lib/leasehold
# Numeric, so that a runtime enforcing "run as non-root" can check it.
USER 10001:10001
EXPOSE 7411
ENTRYPOINT ["/usr/local/bin/leasehold"]
CMD ["help"]
