package client

import (
	"net/http"
	"testing"
)

// The cost, per command, of checking answers against openapi.yaml: loading
// the document once, and checking one answer.
func BenchmarkLoadSpec(b *testing.B) {
	for b.Loop() {
		if _, err := loadSpec(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckAnswer(b *testing.B) {
	body := []byte(`{"held":true,"lease":{"task":"nightly","owner":"w1","token":1,"acquired_at":"2026-12-03T17:14:51.742Z",` +
		`"renewed_at":"2026-12-03T17:14:51.742Z","expires_at":"2026-12-03T17:15:21.742Z","ttl_ms":30000,"ttl_remaining_ms":29877,"renew_count":0,"note":""}}`)
	header := http.Header{"Content-Type": {"application/json"}}
	if err := checkAnswer(http.MethodGet, "/v1/leases/{task}", http.StatusOK, header, body); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := checkAnswer(http.MethodGet, "/v1/leases/{task}", http.StatusOK, header, body); err != nil {
			b.Fatal(err)
		}
	}
}
