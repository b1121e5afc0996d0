package ledger

import "strconv"

// scanCompact reads compact metadata written the way MarshalJSON writes
// it: one object of the keys "v" (an integer) and "a", "r", "t", "h"
// (strings of printable ASCII without escapes), each at most once, no
// whitespace. It reports false for anything else, which the general
// decoder then reads: for every input it accepts it gives exactly what
// the general decoder gives (FuzzScanCompact), without the cost of
// decoding by reflection, once per event read.
func scanCompact(b []byte) (s storedMetadata, ok bool) {
	n := len(b)
	if n < 2 || b[0] != '{' || b[n-1] != '}' {
		return s, false
	}
	var seen [5]bool
	for i := 1; i < n-1; {
		if i > 1 {
			if b[i] != ',' {
				return s, false
			}
			i++
		}
		// A one-letter key.
		if i+4 > n || b[i] != '"' || b[i+2] != '"' || b[i+3] != ':' {
			return s, false
		}
		key, slot := b[i+1], -1
		switch b[i+1] {
		case 'v':
			slot = 0
		case 'a':
			slot = 1
		case 'r':
			slot = 2
		case 't':
			slot = 3
		case 'h':
			slot = 4
		}
		if slot < 0 || seen[slot] {
			return s, false
		}
		seen[slot] = true
		i += 4
		if key == 'v' {
			j := i
			for j < n && b[j] >= '0' && b[j] <= '9' {
				j++
			}
			if j == i || j-i > 9 || (b[i] == '0' && j-i > 1) {
				return s, false
			}
			v, err := strconv.Atoi(string(b[i:j]))
			if err != nil {
				return s, false
			}
			s.V, i = &v, j
			continue
		}
		if i >= n || b[i] != '"' {
			return s, false
		}
		j := i + 1
		for j < n && b[j] != '"' {
			if c := b[j]; c < 0x20 || c > 0x7e || c == '\\' {
				return s, false
			}
			j++
		}
		if j >= n-1 {
			return s, false
		}
		v := string(b[i+1 : j])
		switch key {
		case 'a':
			s.A = v
		case 'r':
			s.R = v
		case 't':
			s.T = v
		case 'h':
			s.H = v
		}
		i = j + 1
	}
	return s, s.V != nil
}
