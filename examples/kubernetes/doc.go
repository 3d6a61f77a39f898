// Package kubernetes holds example manifests for running leasehold as a
// native sidecar beside an app in a Kubernetes pod (deployment.yaml), the
// Secrets they read (secret.yaml, placeholder values) and a
// kustomization.yaml that applies both. It has no code: its test decodes
// every manifest strictly into the Kubernetes API types and checks the
// sidecar's arguments and environment with `leasehold serve`'s own flag
// parsing, its probes against a real sidecar's handler, and the shutdown and
// start-up budgets against the sidecar's own timeouts, so that a renamed
// flag or a mistyped field fails `go test`, not `kubectl apply`.
package kubernetes
