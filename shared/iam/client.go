package iam

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Client asks a remote Better IAM: POST {URL}/v1/decide with a Request, and
// a 200 answer {"allow":bool,"reason":string}. Any other outcome is an error
// (the caller answers UNAVAILABLE: fail closed).
type Client struct {
	URL  string
	HTTP *http.Client
}

// DefaultTimeout bounds one decision.
const DefaultTimeout = 2 * time.Second

// NewClient returns a client with the default 2 s timeout.
func NewClient(url string) *Client {
	return &Client{URL: url, HTTP: &http.Client{Timeout: DefaultTimeout}}
}

func (c *Client) Decide(ctx context.Context, r Request) (Decision, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return Decision{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/v1/decide", bytes.NewReader(body))
	if err != nil {
		return Decision{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient // the context above still bounds the call
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Decision{}, fmt.Errorf("better iam: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Decision{}, fmt.Errorf("better iam: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return Decision{}, fmt.Errorf("better iam: status %d", resp.StatusCode)
	}
	var d struct {
		Allow  *bool  `json:"allow"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(data, &d); err != nil || d.Allow == nil {
		return Decision{}, fmt.Errorf("better iam: malformed decision")
	}
	return Decision{Allow: *d.Allow, Reason: d.Reason}, nil
}
