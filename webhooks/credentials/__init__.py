"""Pure validators for credential Secrets.

Each validator takes a Secret's decoded data (key -> bytes) and returns a list of `Problem`s.
A problem names the key (and, inside a JSON key file, the field) and says what is expected; it
never carries the value, so nothing built from problems can leak a credential.
"""
