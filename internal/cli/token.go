package cli

import "github.com/leasehold/leasehold/internal/endpoint"

// ReadTokenFile reads a bearer token file (endpoint.ReadTokenFile, which
// the Go client applies to LEASEHOLD_TOKEN_FILE too).
func ReadTokenFile(path string) ([]byte, error) { return endpoint.ReadTokenFile(path) }

// ParseToken reads a token file's content (endpoint.ParseToken).
func ParseToken(b []byte) ([]byte, error) { return endpoint.ParseToken(b) }
