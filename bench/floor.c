/* The floor of syscall tracing: empty programs on the sys_enter and sys_exit raw tracepoints. What a
 * tracer adds beyond this is the cost of its own work (timestamps, map updates), not of being there. */
RAW_TRACEPOINT_PROBE(sys_enter)
{
    return 0;
}

RAW_TRACEPOINT_PROBE(sys_exit)
{
    return 0;
}
