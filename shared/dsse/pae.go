package dsse

import "strconv"

// PAE is DSSE's pre-authentication encoding of a payload and its type, the
// bytes a signature covers:
//
//	"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body
//
// with LEN the ASCII decimal byte count. It is what go-securesystemslib's
// dsse.PAE computes (TestPAEMatchesTheLibrary holds the two together); the
// library's dsse package is not linked into the functions because it
// imports golang.org/x/crypto/ssh (for key ids we do not use), whose init
// every bootstrap would otherwise run and carry.
func PAE(payloadType string, payload []byte) []byte {
	out := make([]byte, 0, len("DSSEv1")+len(payloadType)+len(payload)+24)
	out = append(out, "DSSEv1 "...)
	out = strconv.AppendInt(out, int64(len(payloadType)), 10)
	out = append(out, ' ')
	out = append(out, payloadType...)
	out = append(out, ' ')
	out = strconv.AppendInt(out, int64(len(payload)), 10)
	out = append(out, ' ')
	return append(out, payload...)
}
