// Command bc is the Better Compute CLI: release keys and signing, and a
// caller for every API method.
//
//	bc keygen  -out KEY.pem [-alg ecdsa-p256|ed25519]   new signing key; prints keyid and public PEM
//	bc pubkey  (-key KEY.pem | -kms-key ID)             keyid and public PEM of a key (for pins)
//	bc sign    -statement FILE (-key KEY.pem | -kms-key ID)... [-out FILE]
//	                                                    sign a release statement into a DSSE envelope
//	bc call    METHOD [FIELD=string | FIELD:=json | FIELD:=@file.json | @body.json]...
//	                                                    call an API method (BC_API_URL, BC_TOKEN)
//	bc methods                                          list the catalog's methods
//	bc pools show POOL [-tenant T] [-resource R] [-hours H] [-nodes N] [-ascii] [-json]
//	                                                    draw a pool's nodes over the next hours
//	bc check   [-table NAME]                            check the capacity invariants of a table
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{
		"keygen": keygen, "pubkey": pubkey, "sign": sign, "call": call, "methods": methods, "check": check, "pools": pools,
	}
	run, ok := cmds[os.Args[1]]
	if !ok {
		usage()
		os.Exit(2)
	}
	if err := run(os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "bc:", err)
		if e, ok := err.(exitError); ok {
			os.Exit(int(e))
		}
		os.Exit(1)
	}
}

// exitError ends the process with a code, having printed its output.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func usage() {
	fmt.Fprint(os.Stderr, `usage: bc <command> [flags]

  keygen  -out KEY.pem [-alg ecdsa-p256|ed25519]      new release signing key
  pubkey  -key KEY.pem | -kms-key ID                  keyid and public PEM (for pins)
  sign    -statement FILE (-key KEY.pem|-kms-key ID)... [-out FILE]
                                                      sign a release statement (DSSE)
  call    METHOD [FIELD=str] [FIELD:=json] [FIELD:=@file] [@body.json]
                                                      call an API method
  methods                                             list the API methods
  pools show POOL [-tenant T] [-resource R] [-hours H] [-nodes N] [-ascii] [-json]
                                                      draw a pool's nodes over the next hours
  check   [-table NAME]                               check capacity invariants

Environment: BC_API_URL (default http://127.0.0.1:8080), BC_TOKEN (default dev:admin), BC_TENANT,
BC_KMS_ENDPOINT and AWS_REGION for -kms-key, BC_TABLE and BC_DYNAMODB_ENDPOINT for check.
`)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
