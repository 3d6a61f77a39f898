package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/leasecore"
)

// The environment FromEnv reads, as the leasehold binary does.
const (
	// EnvAddr names the sidecar's address: http://HOST:PORT,
	// https://HOST:PORT or unix:PATH.
	EnvAddr = "LEASEHOLD_ADDR"
	// EnvTokenFile names a file holding the sidecar's bearer token.
	EnvTokenFile = "LEASEHOLD_TOKEN_FILE"
)

// DefaultAddr is the address of a sidecar on its default listen address,
// the one FromEnv asks when LEASEHOLD_ADDR is not set.
const DefaultAddr = endpoint.Example

// DefaultTimeout bounds each request that is not a stream, unless
// WithTimeout says otherwise.
const DefaultTimeout = 15 * time.Second

// maxAnswerBytes bounds the answers read (a page of 1000 leases is far
// smaller).
const maxAnswerBytes = 8 << 20

// Client asks one sidecar over its HTTP API. It is safe for concurrent use.
type Client struct {
	ep      endpoint.Endpoint
	name    string // the address, its password masked, for messages
	token   string // the bearer token; empty sends none
	owner   string
	timeout time.Duration
	http    *http.Client
}

// An Option configures a Client.
type Option func(*Client) error

// WithToken sends token as the bearer token (Authorization: Bearer). The
// token never appears in an error.
func WithToken(token string) Option {
	return func(c *Client) error {
		tok, err := endpoint.ParseToken([]byte(token))
		if err != nil {
			return &leasecore.ValidationError{Field: "token", Rule: "must be one word without white space: " + err.Error()}
		}
		c.token = string(tok)
		return nil
	}
}

// WithTokenFile reads the bearer token from the file at path, once, as
// `leasehold --token-file` does.
func WithTokenFile(path string) Option {
	return func(c *Client) error {
		tok, err := endpoint.ReadTokenFile(path)
		if err != nil {
			return err
		}
		c.token = string(tok)
		return nil
	}
}

// WithOwner sets the owner the client claims as when a call names none;
// the default is a fresh leasecore.NewOwner().
func WithOwner(owner string) Option {
	return func(c *Client) error {
		if err := leasecore.ValidateOwner(owner); err != nil {
			return err
		}
		c.owner = owner
		return nil
	}
}

// WithTimeout bounds each request that is not a stream (claim, renew,
// release, the reads); zero or less means DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) error {
		if d > 0 {
			c.timeout = d
		}
		return nil
	}
}

// New returns a client of the sidecar at addr (http://HOST:PORT,
// https://HOST:PORT, or unix:PATH for a sidecar on a Unix socket). A bad
// address is a *leasecore.ValidationError of field "addr" saying the rule.
func New(addr string, opts ...Option) (*Client, error) {
	ep, err := endpoint.ParseAddr(addr)
	if err != nil {
		return nil, &leasecore.ValidationError{Field: "addr", Rule: err.Error()}
	}
	c := &Client{ep: ep, name: ep.Redacted(), timeout: DefaultTimeout, http: &http.Client{Transport: ep.Transport()}}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if c.owner == "" {
		c.owner = leasecore.NewOwner()
	}
	return c, nil
}

// FromEnv returns a client configured as the leasehold binary is: the
// sidecar at LEASEHOLD_ADDR (DefaultAddr when unset), with the bearer token
// of the file LEASEHOLD_TOKEN_FILE names, if set. opts apply after.
func FromEnv(opts ...Option) (*Client, error) {
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		addr = DefaultAddr
	}
	if path := os.Getenv(EnvTokenFile); path != "" {
		opts = append([]Option{WithTokenFile(path)}, opts...)
	}
	c, err := New(addr, opts...)
	var ve *leasecore.ValidationError
	if errors.As(err, &ve) && ve.Field == "addr" {
		ve.Field = EnvAddr
	}
	return c, err
}

// Addr is the sidecar's address, its password masked: fit for a message.
func (c *Client) Addr() string { return c.name }

// Owner is the owner the client claims as when a call names none.
func (c *Client) Owner() string { return c.owner }

func (c *Client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

// taskPath is the path of a task's lease: {task} is one escaped segment.
func taskPath(task string) string { return "/v1/leases/" + url.PathEscape(task) }

// exchange is one answer of the sidecar, checked against openapi.yaml.
type exchange struct {
	method, template, path string
	status                 int
	header                 http.Header
	body                   []byte
}

// do sends a request to path, an instance of the operation (method,
// template) of openapi.yaml, and returns the answer once it is known to be
// one the API gives there (see checkAnswer). A transport failure, and an
// answer the API does not give, are unavailable (*leasecore.UnavailableError,
// the latter wrapping a *NotSidecarError).
func (c *Client) do(ctx context.Context, op, method, template, path string, body any) (*exchange, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.ep.URL(path), r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.unreachable(op, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, leasecore.Unavailable(op, fmt.Errorf("%s %s: reading the answer: %w", method, path, err))
	}
	x := &exchange{method: method, template: template, path: path, status: resp.StatusCode, header: resp.Header, body: data}
	if err := checkAnswer(method, template, resp.StatusCode, resp.Header, data); err != nil {
		return nil, c.notSidecar(op, x, err)
	}
	return x, nil
}

// tokenMask replaces the bearer token wherever a message would repeat it.
const tokenMask = "xxxxx"

// scrub masks the client's bearer token wherever s, text a server sent
// that goes into a message, repeats it: a server that echoes requests back
// (a debugging proxy, a mistyped address) must not carry the token into an
// error. Only messages are scrubbed, never what is decoded.
func (c *Client) scrub(s string) string {
	if c.token == "" {
		return s
	}
	return strings.ReplaceAll(s, c.token, tokenMask)
}

// refusal is the package's refusal, its text scrubbed.
func (c *Client) refusal(op, task string, x *exchange) error {
	return refusal(op, task, x.status, x.header, x.body, c.scrub)
}

// decode decodes a checked answer into out; what the schema admits but
// does not decode is not the API's answer.
func (c *Client) decode(op string, x *exchange, out any) error {
	if err := json.Unmarshal(x.body, out); err != nil {
		return c.notSidecar(op, x, &notTheAPI{fmt.Sprintf("status %d with a body that does not decode: %v", x.status, err)})
	}
	return nil
}

// unreachable is the error of a sidecar that could not be asked: it names
// the sidecar with its password masked (a *url.Error would quote the whole
// URL).
func (c *Client) unreachable(op string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return leasecore.Unavailable(op, fmt.Errorf("sidecar %s unavailable: %w", c.name, err))
}

// NotSidecarError says that an answer is not one the API gives: the server
// at the client's address is something else (another service, a proxy's
// error page), or not a working sidecar. The client reports it as
// unavailable (wrapped in a *leasecore.UnavailableError), never as a model
// outcome.
type NotSidecarError struct {
	Addr   string // the address asked, its password masked
	Method string
	Path   string
	Status int    // the answer's status; 0 when it did not get that far
	Reason string // what is wrong with the answer
}

func (e *NotSidecarError) Error() string {
	return fmt.Sprintf("the server at %s did not answer like a leasehold sidecar: %s %s: %s", e.Addr, e.Method, e.Path, e.Reason)
}

// notSidecar wraps why, the reason an answer is not the API's, as
// unavailable.
func (c *Client) notSidecar(op string, x *exchange, why error) error {
	var n *notTheAPI
	if !errors.As(why, &n) {
		return why // not the answer's fault (a bug of this build)
	}
	reason := why.Error()
	if x.status >= 400 {
		// What the refusal said, for whoever reads the message.
		reason += fmt.Sprintf(" (%d %s: %s)", x.status, http.StatusText(x.status), excerpt(x.body))
	}
	return leasecore.Unavailable(op, &NotSidecarError{Addr: c.name, Method: x.method, Path: x.path, Status: x.status, Reason: c.scrub(reason)})
}
