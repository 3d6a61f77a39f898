package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// maxTokenBytes bounds a token file, which should hold one line.
const maxTokenBytes = 4096

// ReadTokenFile reads a bearer token: the file's content without surrounding
// white space (a trailing newline is usual). An empty file is an error, not
// "no authentication".
func ReadTokenFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	if len(b) > maxTokenBytes {
		return nil, fmt.Errorf("token file %s: larger than %d bytes; it should hold one token", path, maxTokenBytes)
	}
	tok := bytes.TrimSpace(b)
	if len(tok) == 0 {
		return nil, fmt.Errorf("token file %s is empty", path)
	}
	if bytes.ContainsAny(tok, " \t\r\n") {
		return nil, fmt.Errorf("token file %s: the token must be one word without white space", path)
	}
	return tok, nil
}
