package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing is off unless the standard OpenTelemetry variables ask for it:
// OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) with
// OTEL_TRACES_EXPORTER unset. OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn it off. The exporter is OTLP over HTTP
// (protobuf), and reads its other settings from the environment as the
// SDK defines them: endpoint, headers, timeout, compression,
// certificates; the sampler is OTEL_TRACES_SAMPLER(_ARG), the batch
// OTEL_BSP_*, the resource OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
// (service.name defaults to reviewledger).

// tracingEnabled reports whether the environment turns tracing on; the
// error names the variable at fault.
func tracingEnabled(getenv func(string) string) (bool, error) {
	if v := strings.ToLower(strings.TrimSpace(getenv("OTEL_SDK_DISABLED"))); v == "true" {
		return false, nil
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := getenv(k); v != "" {
			if v != "http/protobuf" {
				return false, fmt.Errorf("%s: only http/protobuf is supported, got %q", k, v)
			}
			break // the traces setting overrides the general one
		}
	}
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "otlp":
		return true, nil
	case "none":
		return false, nil
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER: must be otlp or none, got %q", v)
	}
}

// openTracing returns the tracer provider the environment asks for (a
// no-op one when tracing is off) and the function flushing and stopping
// it.
func openTracing(ctx context.Context) (trace.TracerProvider, func(context.Context) error, error) {
	on, err := tracingEnabled(os.Getenv)
	if err != nil || !on {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "reviewledger"), attribute.String("service.version", version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID())
	if err != nil {
		return nil, nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}
