//go:build !unix

package sidecar

// raiseFileLimit has no open-file limit to read where getrlimit(2) does not
// exist: the caps are not checked.
func raiseFileLimit() (uint64, error) {
	return fileLimitUnbounded, nil
}
