# Portico's image: both binaries, static (CGO_ENABLED=0), on distroless "static" as non-root.
# The Deployment runs /portico-controller, the DaemonSet /portico-speaker (config/).
# config/image_test.go runs this file's build command and checks the binaries are static. No
# -trimpath, and the Makefile turns cgo off for every build, so the test's build shares the
# compile cache of every other test instead of recompiling everything.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -ldflags=-s -o /out/ ./cmd/portico-controller ./cmd/portico-speaker

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/portico-controller /out/portico-speaker /
USER 65532:65532
ENTRYPOINT ["/portico-controller"]
