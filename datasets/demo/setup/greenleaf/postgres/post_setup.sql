ALTER TABLE ONLY public.categories
ADD CONSTRAINT fk_categories_parent FOREIGN KEY(parent_category_id) REFERENCES public.categories(category_id);

ALTER TABLE ONLY public.products
ADD CONSTRAINT fk_products_category FOREIGN KEY(category_id) REFERENCES public.categories(category_id);

ALTER TABLE ONLY public.products
ADD CONSTRAINT fk_products_supplier FOREIGN KEY(supplier_id) REFERENCES public.suppliers(supplier_id);

ALTER TABLE ONLY public.customers
ADD CONSTRAINT fk_customers_home_store FOREIGN KEY(home_store_id) REFERENCES public.stores(store_id);

ALTER TABLE ONLY public.orders
ADD CONSTRAINT fk_orders_customer FOREIGN KEY(customer_id) REFERENCES public.customers(customer_id);

ALTER TABLE ONLY public.orders
ADD CONSTRAINT fk_orders_store FOREIGN KEY(store_id) REFERENCES public.stores(store_id);

ALTER TABLE ONLY public.order_items
ADD CONSTRAINT fk_order_items_order FOREIGN KEY(order_id) REFERENCES public.orders(order_id);

ALTER TABLE ONLY public.order_items
ADD CONSTRAINT fk_order_items_product FOREIGN KEY(product_id) REFERENCES public.products(product_id);

ALTER TABLE ONLY public.reviews
ADD CONSTRAINT fk_reviews_product FOREIGN KEY(product_id) REFERENCES public.products(product_id);

ALTER TABLE ONLY public.reviews
ADD CONSTRAINT fk_reviews_customer FOREIGN KEY(customer_id) REFERENCES public.customers(customer_id);

ALTER TABLE ONLY public.products
ADD CONSTRAINT uq_products_sku UNIQUE(sku);

ALTER TABLE ONLY public.customers
ADD CONSTRAINT uq_customers_email UNIQUE(email);

ALTER TABLE ONLY public.reviews
ADD CONSTRAINT ck_reviews_rating CHECK (rating BETWEEN 1 AND 5);

CREATE INDEX idx_products_category ON public.products(category_id);

CREATE INDEX idx_orders_customer ON public.orders(customer_id);

CREATE INDEX idx_orders_store_ts ON public.orders(store_id, order_ts);

CREATE INDEX idx_order_items_order ON public.order_items(order_id);

CREATE INDEX idx_order_items_product ON public.order_items(product_id);

CREATE INDEX idx_reviews_product ON public.reviews(product_id);

SELECT setval(pg_get_serial_sequence('public.stores', 'store_id'), (SELECT MAX(store_id) FROM public.stores));

SELECT setval(pg_get_serial_sequence('public.categories', 'category_id'), (SELECT MAX(category_id) FROM public.categories));

SELECT setval(pg_get_serial_sequence('public.suppliers', 'supplier_id'), (SELECT MAX(supplier_id) FROM public.suppliers));

SELECT setval(pg_get_serial_sequence('public.products', 'product_id'), (SELECT MAX(product_id) FROM public.products));

SELECT setval(pg_get_serial_sequence('public.customers', 'customer_id'), (SELECT MAX(customer_id) FROM public.customers));

SELECT setval(pg_get_serial_sequence('public.orders', 'order_id'), (SELECT MAX(order_id) FROM public.orders));

SELECT setval(pg_get_serial_sequence('public.order_items', 'order_item_id'), (SELECT MAX(order_item_id) FROM public.order_items));

SELECT setval(pg_get_serial_sequence('public.reviews', 'review_id'), (SELECT MAX(review_id) FROM public.reviews));
