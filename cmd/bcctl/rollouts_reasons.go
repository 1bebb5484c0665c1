package main

import (
	"strings"
)

// reasonWidth is the widest reason a table cell shows; reasonLine the
// widest line of a reason watch prints.
const (
	reasonWidth = 60
	reasonLine  = 100
)

// readableReason is a reason as the API keeps it (200 characters; a longer
// one ends in "…"), with a clipped tail cut back to a word boundary, so no
// hash or URL is shown half.
func readableReason(s string) string {
	if !strings.HasSuffix(s, "…") {
		return s
	}
	body := strings.TrimSuffix(s, "…")
	if i := strings.LastIndexByte(body, ' '); i > 0 {
		body = body[:i]
	}
	return strings.TrimRight(body, " ,:;") + " …"
}

// cutReason fits a reason in a table cell, cut at a word boundary; cut
// says whether it was.
func cutReason(s string) (out string, cut bool) {
	s = readableReason(s)
	r := []rune(s)
	if len(r) <= reasonWidth {
		return s, false
	}
	head := string(r[:reasonWidth-1])
	if i := strings.LastIndexByte(head, ' '); i > reasonWidth/3 {
		head = head[:i]
	} else if i := strings.LastIndexByte(head, '/'); i > reasonWidth/3 {
		head = head[:i+1] // within a long URL, after a path segment
	}
	return strings.TrimRight(head, " ,:;") + "…", true
}

// wrapWords breaks s into lines of at most width runes at spaces (a word
// longer than width stands on a line of its own).
func wrapWords(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case len([]rune(line))+1+len([]rune(w)) <= width:
			line += " " + w
		default:
			lines, line = append(lines, line), w
		}
	}
	return append(lines, line)
}
