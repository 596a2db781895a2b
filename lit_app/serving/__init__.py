"""What a server serves: its flags (server_flags), the models (served_models, model_group), the LIT
layouts and the client root (assets, request_guard, client_build). The entry points that use them sit
at lit_app/: server.py, plugin.py, notebook.py."""
