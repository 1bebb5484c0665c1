// Package client calls the Better Compute API over HTTP: the CLI and the
// end-to-end suite use it against the local gateway or a deployed URL.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
)

// Client calls one API base URL with one bearer token.
type Client struct {
	URL   string // e.g. http://127.0.0.1:8080
	Token string // sent as "Authorization: Bearer <Token>"; "" sends none
	HTTP  *http.Client
}

// New returns a client with a 30 s timeout.
func New(url, token string) *Client {
	return &Client{URL: strings.TrimRight(url, "/"), Token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// Response is a raw API answer.
type Response struct {
	Status    int
	RequestID string
	Body      []byte
}

// Do POSTs body to the method's route ("releases.register") and returns the
// raw answer; only transport failures are errors.
func (c *Client) Do(ctx context.Context, method string, body []byte) (*Response, error) {
	resource, verb, ok := strings.Cut(method, ".")
	if !ok {
		return nil, fmt.Errorf("method %q is not <resource>.<verb>", method)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/api/compute/"+resource+"/"+verb, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &Response{Status: resp.StatusCode, RequestID: resp.Header.Get("x-request-id"), Body: data}, nil
}

// Call sends in (marshalled to JSON) and decodes a 200 answer into out. An
// API error comes back as *apierr.Error.
func (c *Client) Call(ctx context.Context, method string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	resp, err := c.Do(ctx, method, body)
	if err != nil {
		return err
	}
	if resp.Status != http.StatusOK {
		return ErrorOf(resp)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(resp.Body, out)
}

// ErrorOf decodes the error envelope of a non-200 answer.
func ErrorOf(resp *Response) error {
	var env struct {
		Error *apierr.Error `json:"error"`
	}
	if err := json.Unmarshal(resp.Body, &env); err != nil || env.Error == nil {
		return fmt.Errorf("HTTP %d: %s", resp.Status, bytes.TrimSpace(resp.Body))
	}
	return env.Error
}
