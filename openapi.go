// Package leasehold is the root of the leasehold module. It holds the HTTP
// contract, openapi.yaml, so that the sidecar can validate requests against
// it and serve it, and tests can check responses against it. The lease model
// itself lives in leasecore; the sidecar binary in sidecar.
package leasehold

import (
	_ "embed"
	"fmt"

	"github.com/getkin/kin-openapi/openapi3"
)

// OpenAPI is the OpenAPI 3.0 document of the sidecar's HTTP API, exactly as
// openapi.yaml at the repository root: the source of truth for routes,
// request rules and response shapes.
//
//go:embed openapi.yaml
var OpenAPI []byte

// APIVersion returns the OpenAPI document's own version (info.version). It
// changes with the document; the path prefix /v1 changes only with a
// breaking change, which docs/compatibility.md rules out within v1.
func APIVersion() (string, error) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		return "", fmt.Errorf("read openapi.yaml: %w", err)
	}
	if doc.Info == nil || doc.Info.Version == "" {
		return "", fmt.Errorf("openapi.yaml has no info.version")
	}
	return doc.Info.Version, nil
}
