# Baton's one image: every component (controlplane, injector, agent, replicator) is a
# command of the one binary. `make image` builds it.
# image: baton-kafka/baton:0.1.0
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/baton ./cmd/baton

# Distroless, no shell, the nonroot user (65532), as the chart's securityContext expects.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/baton /baton
USER 65532:65532
ENTRYPOINT ["/baton"]
