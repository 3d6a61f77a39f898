package endpoint

import (
	"bytes"
	"errors"
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
	tok, err := ParseToken(b)
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return tok, nil
}

// ParseToken reads a token file's content: one word, without the white
// space around it. Its errors never quote the content.
func ParseToken(b []byte) ([]byte, error) {
	if len(b) > maxTokenBytes {
		return nil, fmt.Errorf("larger than %d bytes; it should hold one token", maxTokenBytes)
	}
	tok := bytes.TrimSpace(b)
	if len(tok) == 0 {
		return nil, errors.New("it is empty")
	}
	if bytes.ContainsAny(tok, " \t\r\n") {
		return nil, errors.New("the token must be one word without white space")
	}
	return tok, nil
}
