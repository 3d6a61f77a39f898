// Package leasehold is the root of the leasehold module. It holds the HTTP
// contract, openapi.yaml, so that the sidecar can validate requests against
// it and serve it, and tests can check responses against it. The lease model
// itself lives in leasecore; the sidecar binary in sidecar.
package leasehold

import _ "embed"

// OpenAPI is the OpenAPI 3.0 document of the sidecar's HTTP API, exactly as
// openapi.yaml at the repository root: the source of truth for routes,
// request rules and response shapes.
//
//go:embed openapi.yaml
var OpenAPI []byte
