//go:build race

package main

// raceBuild: this test binary has the race detector, so the served binary
// gets it too (and links from the same compiled packages).
const raceBuild = true
