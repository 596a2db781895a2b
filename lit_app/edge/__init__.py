"""The HTTP edge: who may call (security, security_config, hosts, tokens), what a request may carry
(request_body, paths, limits), which client it comes from and whether it is still there (clients,
disconnect), the HTTP server, and LIT's own routes' and components' client mistakes as 4xx."""
