// Package secretsapi serves the one Secrets Manager operation the control
// plane calls, GetSecretValue, over the service's real protocol (AWS JSON 1.1,
// SigV4-signed requests), for tests and the Lambda harness. No local Secrets
// Manager server can be installed here (dynalite and local-kms cover DynamoDB
// and KMS), so this is the one stand-in: the SDK client the bootstraps link
// talks to it unchanged, through BC_SECRETSMANAGER_ENDPOINT.
package secretsapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// Server answers GetSecretValue for the secrets it holds.
type Server struct {
	URL string

	secrets map[string]string // ARN → secret string; only read once serving
	reads   atomic.Int64
}

// Start serves secrets (ARN → string) until tb ends.
func Start(tb testing.TB, secrets map[string]string) *Server {
	s := &Server{secrets: secrets}
	srv := httptest.NewServer(s)
	tb.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Reads is how many secret values were handed out.
func (s *Server) Reads() int64 { return s.reads.Load() }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, typ, msg string) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": typ, "Message": msg})
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") ||
		!strings.Contains(r.Header.Get("Authorization"), "/secretsmanager/aws4_request") {
		fail(http.StatusBadRequest, "MissingAuthenticationTokenException", "request is not SigV4-signed for secretsmanager")
		return
	}
	if r.Method != http.MethodPost || r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue" {
		fail(http.StatusBadRequest, "UnknownOperationException", "only GetSecretValue is served here")
		return
	}
	var in struct{ SecretId string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.SecretId == "" {
		fail(http.StatusBadRequest, "InvalidParameterException", "SecretId is required")
		return
	}
	v, ok := s.secrets[in.SecretId]
	if !ok {
		fail(http.StatusBadRequest, "ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
		return
	}
	s.reads.Add(1)
	name := in.SecretId[strings.LastIndex(in.SecretId, ":")+1:]
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(map[string]any{"ARN": in.SecretId, "Name": name, "SecretString": v,
		"VersionId": "v1", "VersionStages": []string{"AWSCURRENT"}, "CreatedDate": 1767225600})
}
