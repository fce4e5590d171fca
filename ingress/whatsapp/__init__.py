"""WhatsApp Business Cloud API: webhook in, Graph API out (docs/whatsapp-setup.md)."""
