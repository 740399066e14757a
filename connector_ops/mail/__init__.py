"""The transactional e-mail connector (spec 4.B): one action, ``mail.send_transactional_message``."""
