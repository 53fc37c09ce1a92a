from .core import paginate, page_count
