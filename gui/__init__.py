"""The desktop window's widgets and models: tables, charts, argument forms, a metric's tab, the panels and
their colours. gui/main_window.py puts them together; nothing here talks to a process or the network."""
