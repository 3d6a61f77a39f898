// Package kubernetes holds example manifests for running leasehold as a
// native sidecar beside an app in a Kubernetes pod (deployment.yaml), the
// Secrets they read (secret.yaml, placeholder values) and a
// kustomization.yaml that applies both; and, in route-to-holder/, a
// Deployment whose Service sends traffic only to the pod holding a lease
// (the app's readiness probe asks its sidecar's probe listener GET
// /v1/leases/{task}/held-here), with its own Secrets and kustomization.yaml.
// It has no code: its tests decode every manifest of both strictly into the
// Kubernetes API types and check the sidecar's arguments and environment
// with `leasehold serve`'s own flag parsing, its probes against a real
// sidecar's handler, and the shutdown and start-up budgets against the
// sidecar's own timeouts; route-to-holder's app command line is run against
// a real sidecar while its readiness probe is asked, so that a renamed flag,
// a wrong port or a mistyped field fails `go test`, not `kubectl apply`.
package kubernetes
