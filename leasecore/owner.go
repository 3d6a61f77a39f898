package leasecore

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
)

// NewOwner returns a fresh owner for a process that was given none:
// <hostname>#<pid>#<12 random hex digits>. The host tells replicas apart, the
// pid processes on one host, and the random part processes that reuse a pid
// (pid 1 in every container) as well as the many owners one process makes (a
// sidecar makes one per keepalive stream that names none). A host without a
// name is "leasehold".
func NewOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "leasehold"
	}
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return fmt.Sprintf("%s#%d#%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
