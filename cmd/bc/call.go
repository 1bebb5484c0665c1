package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/client"
)

func call(args []string) error {
	if len(args) < 1 {
		return errors.New("call: METHOD is required (see `bc methods`)")
	}
	method := args[0]
	if api.Lookup(method) == nil {
		return fmt.Errorf("call: no method %q (see `bc methods`)", method)
	}
	body, err := buildBody(args[1:], os.ReadFile)
	if err != nil {
		return err
	}
	c := client.New(envOr("BC_API_URL", "http://127.0.0.1:8080"), envOr("BC_TOKEN", "dev:admin"))
	resp, err := c.Do(context.Background(), method, body)
	if err != nil {
		return err
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, resp.Body, "", "  ") != nil {
		pretty.Write(resp.Body)
	}
	fmt.Println(pretty.String())
	if resp.Status != 200 {
		return exitError(1)
	}
	return nil
}

// buildBody builds the request JSON from httpie-style arguments:
// FIELD=value (a string), FIELD:=json (raw JSON), FIELD:=@file (JSON from a
// file), and @file (the whole body from a file). Later fields win.
func buildBody(args []string, readFile func(string) ([]byte, error)) ([]byte, error) {
	fields := map[string]json.RawMessage{}
	var order []string
	set := func(k string, v json.RawMessage) {
		if _, ok := fields[k]; !ok {
			order = append(order, k)
		}
		fields[k] = v
	}
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "@"):
			data, err := readFile(a[1:])
			if err != nil {
				return nil, err
			}
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(data, &obj); err != nil {
				return nil, fmt.Errorf("%s: %w", a[1:], err)
			}
			for k, v := range obj {
				set(k, v)
			}
		case strings.Contains(a, ":="):
			k, v, _ := strings.Cut(a, ":=")
			raw := []byte(v)
			if strings.HasPrefix(v, "@") {
				var err error
				if raw, err = readFile(v[1:]); err != nil {
					return nil, err
				}
			}
			if !json.Valid(raw) {
				return nil, fmt.Errorf("%s: not valid JSON", k)
			}
			set(k, bytes.TrimSpace(raw))
		case strings.Contains(a, "="):
			k, v, _ := strings.Cut(a, "=")
			s, _ := json.Marshal(v)
			set(k, s)
		default:
			return nil, fmt.Errorf("argument %q is not FIELD=value, FIELD:=json or @file", a)
		}
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range order {
		if i > 0 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(fields[k])
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func methods([]string) error {
	for _, m := range api.Catalog {
		fmt.Printf("%-22s %-8s %s @ %s\n", m.Name, m.Kind, m.Permission, m.Scope)
	}
	return nil
}
