// Package api holds reviewledger's HTTP contract, the OpenAPI 3.1 document
// openapi.json, and beneath it the packages that serve and use it: httpapi
// (the HTTP adapter), engine, audit, notify, client and the rest.
package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of every route, schema and error,
// served on /openapi.json by httpapi. httpapi's TestOpenAPIMatchesRoutes
// keeps it and the registered routes in step.
//
//go:embed openapi.json
var OpenAPI []byte
