"""A monitoring session without the window's widgets: the controller (one worker per metric, the transport)
that the window and the headless mode share, and the headless mode itself (`main_app.py --headless`)."""
