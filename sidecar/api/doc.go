// Package api holds the types and the echo server interface generated from
// the repository's openapi.yaml by oapi-codegen. Nothing in api.gen.go is
// edited by hand: change openapi.yaml and run `go generate ./sidecar/api`.
package api

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../openapi.yaml
