"""The output messages: their columns once, CDR bytes, rclpy fallbacks, markers."""
