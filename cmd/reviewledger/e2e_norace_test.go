//go:build !race

package main

// raceBuild: see e2e_race_test.go.
const raceBuild = false
