// Package deploy holds what running leasehold with Docker Compose needs
// besides docker-compose.yml and the Dockerfile at the repository root: the
// development-only bearer token the compose file mounts as a secret
// (dev-only-insecure.token; public, never for a real deployment), Load,
// which reads the compose file as Docker Compose does, HostPath, which maps
// a container path through a service's bind mounts, and the test that
// checks the compose file with the leasehold binary's own flag
// parsing, so that a typo in a service's command fails `go test`, not
// `docker compose up`.
//
// e2e/compose_test.go and e2e/worker_test.go run the same services'
// commands without Docker, against a real PostgreSQL.
package deploy
