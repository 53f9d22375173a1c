"""Settings for the toy web app."""

SECRET_KEY = "toy-secret-7f3a9c"
VERSION = "1.4.2"
DEBUG = False
